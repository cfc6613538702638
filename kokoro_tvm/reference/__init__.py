"""The PyTorch reference (pt.dynamic) with every stage exposed and SineGen noise as an explicit input.

noise.py and stages.py are numpy only: the TVM runtime shares them and never imports torch."""
