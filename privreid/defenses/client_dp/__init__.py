"""client_dp"""
