"""The code of this training project; README.md says what it trains and how to run it."""
