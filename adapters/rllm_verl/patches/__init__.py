"""patches"""
