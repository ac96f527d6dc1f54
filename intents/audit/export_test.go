package audit

import (
	"context"
	"time"
)

// ActivityRead is Activity's read alone, without its roll-up: from the
// roll-up and the intents finished outside it (byMinute), or from the
// intents alone.
func ActivityRead(ctx context.Context, s *Store, since time.Time, bucket time.Duration, buckets int, byMinute bool) (Activity, error) {
	return s.activity(ctx, since, bucket, buckets, byMinute)
}
