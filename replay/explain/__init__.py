"""`explain`: why an allocation ran out of memory, and which settings would have avoided it."""
