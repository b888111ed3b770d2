"""Decoder LMs beyond dense attention: mixture-of-experts, state-space and hybrid models."""
