"""A Flower app comparing fastfair's rules as Flower strategies on scikit-learn's digits."""
