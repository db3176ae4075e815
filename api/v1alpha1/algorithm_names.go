package v1alpha1

// The JSON names of a Limit's algorithm fields, exactly one of which is
// set. Field paths, messages and summaries name an algorithm by them.
const (
	AlgorithmTokenBucket          = "tokenBucket"
	AlgorithmFixedWindow          = "fixedWindow"
	AlgorithmSlidingWindowLog     = "slidingWindowLog"
	AlgorithmSlidingWindowCounter = "slidingWindowCounter"
	AlgorithmLeakyBucket          = "leakyBucket"
	AlgorithmGCRA                 = "gcra"
	AlgorithmCalendar             = "calendar"
	AlgorithmConcurrency          = "concurrency"
)
