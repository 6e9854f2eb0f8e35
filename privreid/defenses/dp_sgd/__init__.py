"""dp_sgd"""
