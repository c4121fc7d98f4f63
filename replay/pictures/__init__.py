"""Pictures: matplotlib plots and interactive HTML pages of a replay."""
