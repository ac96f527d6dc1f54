package brokerloop

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential backoff: Base doubled with each failure
// in a row, optionally jittered, never above Max.
type Backoff struct {
	// Base is the first delay.
	Base time.Duration
	// Max caps every delay. It must not be less than Base.
	Max time.Duration
	// JitterPercent, from 0 to 50, moves each delay by up to that many
	// percent either way, in whole percents, so that consumers cut off
	// together do not reconnect together. 0 makes Delay deterministic.
	JitterPercent int
}

// Delay is the wait after n failures in a row (n = 0 for the first): Base
// doubled n times, jittered, at most Max.
func (b Backoff) Delay(n int) time.Duration {
	d := b.Base
	for range n {
		if d >= b.Max || d > math.MaxInt64/2 {
			// From here on every delay is Max: doubled once more, d is
			// at least twice Max, which no jitter of at most 50% brings
			// under the cap (and d must not double past what a
			// Duration holds).
			return b.Max
		}
		d *= 2
	}
	return b.jitter(d)
}

// jitter is d moved by a whole percentage drawn from ±JitterPercent, as
// go-retry's WithJitterPercent does, and capped at Max.
func (b Backoff) jitter(d time.Duration) time.Duration {
	if b.JitterPercent > 0 {
		j := int64(min(b.JitterPercent, 50))
		pct := 1 - float64(rand.Int64N(2*j)-j)/100
		if f := float64(d) * pct; f < float64(b.Max) {
			return time.Duration(f)
		}
		return b.Max
	}
	return min(d, b.Max)
}
