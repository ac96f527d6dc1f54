DROP TABLE outbox_events;
DROP FUNCTION outbox_events_forbid_update();
DROP TABLE outbox_attempts;
DROP TABLE outbox_intents;
DROP TABLE outbox_processed_messages;
