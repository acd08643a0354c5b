package jobs

// SkipCreateOutputs makes y leave output tables to the SDK, as the runner
// did before it created them (and their folders) itself: the negative
// tests prove the fake cluster catches what that breaks.
func SkipCreateOutputs(y *YT) { y.skipCreateOutputs = true }
