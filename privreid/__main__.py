"""``python -m privreid``: the ``privreid`` command line."""

from privreid.cli import app

if __name__ == "__main__":
    app(prog_name="privreid")
