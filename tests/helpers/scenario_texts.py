"""Scenario documents shared by several test files."""

#: A small lazy (zipf) scenario: V = 64, so per-prefix and PIT checks run instead of the joint law.
ZIPF_V64 = """
schema: 1
name: zipf-v64
tags: [large]
vocab: 64
k: 4
length: 3
samples: 6000
target: {kind: zipf, exponent: 1.1, seed: 1}
draft: {kind: zipf, exponent: 0.8, seed: 1}
"""
