"""beta_noise"""
