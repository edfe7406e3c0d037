"""Design spaces, samplers and labelled Parquet datasets (issue: Datasets)."""
