"""Hand-written baselines the product is compared with, each loaded exactly like the product."""
