"""helpers"""
