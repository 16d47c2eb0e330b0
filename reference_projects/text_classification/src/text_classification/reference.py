"""A bag-of-words reference: what word counts alone achieve on the same split.

    python -m text_classification.reference [--field value ...]

Fits scikit-learn's CountVectorizer + LogisticRegression on the training texts (tokenized
as the model's are) and prints its validation accuracy beside the majority-class baseline.
With word pairs too (`ngram_range=(1, 2)`) it sees "not good", but still not which clause of
"good, but the ending was bad" decides. A model that reads word order should beat both.
"""

import sys

from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression

from . import task
from .config import ConfigError, load_config
from .data import build_datasets
from .loaders import Datasets


def bag_of_words_accuracy(datasets: Datasets, ngrams: int = 1) -> float:
    """Validation accuracy of logistic regression on counts of words (and word n-grams)."""
    vectorizer = CountVectorizer(
        tokenizer=datasets.preprocess.tokenize,
        lowercase=False,  # tokenize lowercases
        token_pattern=None,
        ngram_range=(1, ngrams),
    )
    train = vectorizer.fit_transform(datasets.train.texts)
    classifier = LogisticRegression(max_iter=2000)
    classifier.fit(train, datasets.train_targets.numpy())
    val = vectorizer.transform(datasets.val.texts)
    return float(classifier.score(val, datasets.val_targets.numpy()))


def main(argv: list[str] | None = None) -> dict[str, float]:
    try:
        cfg = load_config(sys.argv[1:] if argv is None else argv, command="reference")
        datasets = build_datasets(cfg)
        results = {
            "majority_class": task.baseline(datasets.train_targets, datasets.val_targets),
            "bag_of_words": bag_of_words_accuracy(datasets),
            "bag_of_words_and_pairs": bag_of_words_accuracy(datasets, ngrams=2),
        }
    except ConfigError as error:
        raise SystemExit(f"error: {error}") from None
    for name, accuracy in results.items():
        print(f"{name:>22}  validation accuracy {accuracy:.4f}")
    return results


if __name__ == "__main__":
    main()
