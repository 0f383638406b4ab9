"""Next-item recommendation: sequences, leave-one-out splits, full-ranking metrics.

The pipeline of BSARec (Shin et al., AAAI 2024) and SASRec as reusable
functions: turn `(user, item, timestamp)` interactions into time-ordered
item sequences, split them leave-one-out into left-padded training prefixes
and validation/test queries, and score a model by ranking every item.
"""

from keras_attn.recommendation.data import (
    LeaveOneOutSplit,
    index_items,
    leave_one_out_split,
    left_pad,
    movielens_100k_split,
    user_sequences,
)
from keras_attn.recommendation.evaluation import RankingEarlyStopping, evaluate_full_ranking
from keras_attn.recommendation.metrics import (
    exclusion_mask,
    hit_rate,
    ndcg,
    ranking_metrics,
    target_ranks,
)
from keras_attn.recommendation.training import (
    fit_recommender,
    sample_negatives,
)

__all__ = [
    "LeaveOneOutSplit",
    "RankingEarlyStopping",
    "evaluate_full_ranking",
    "exclusion_mask",
    "fit_recommender",
    "hit_rate",
    "index_items",
    "leave_one_out_split",
    "left_pad",
    "movielens_100k_split",
    "ndcg",
    "ranking_metrics",
    "sample_negatives",
    "target_ranks",
    "user_sequences",
]
