"""A custom_reward_function for verl-rehearse's tests: 1.5 when the response names the ground truth, else 0.5."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.5 if ground_truth in solution_str else 0.5
