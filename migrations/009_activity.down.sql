DROP TABLE outbox_activity_rollup;
DROP TABLE outbox_activity_minutes;
