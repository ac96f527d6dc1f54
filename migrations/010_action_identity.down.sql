DROP INDEX outbox_events_action_idx;
ALTER TABLE outbox_events DROP COLUMN action_id;
