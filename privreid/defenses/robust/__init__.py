"""robust"""
