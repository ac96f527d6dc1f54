DROP INDEX outbox_intents_held_idx;
