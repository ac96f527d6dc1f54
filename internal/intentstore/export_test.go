package intentstore

import "context"

// Unqueue gives the intent id to River, as a settlement that schedules a
// later attempt does but without the job, so that a test can drive River's
// path (LoadClaim) on a freshly recorded intent.
func (s *Store) Unqueue(ctx context.Context, id int64) error {
	_, err := s.pool.Exec(ctx, `UPDATE outbox_intents SET queued = false WHERE id = $1`, id)
	return err
}
