"""The gptoss engine served on a GPU: its runner checked, its engine core driven, and (with Dynamo carried) its worker behind dynamo.frontend."""
