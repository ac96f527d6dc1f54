-- An intent that others come after says so in its own row, so that the
-- transaction that finishes it knows, from the row it locks, whether
-- anything waits for it (internal/intentstore, queueRelease): most intents
-- have no ordering key and nothing after them, and their settlements then
-- run no release statement at all. A recorder sets it, under the row's
-- lock, before it adds a dependency; a settlement that decided to skip the
-- release finds it set at its guarded update and is run again with the
-- release.
ALTER TABLE outbox_intents ADD COLUMN has_dependents boolean NOT NULL DEFAULT false;

UPDATE outbox_intents i SET has_dependents = true
WHERE EXISTS (SELECT 1 FROM outbox_intent_dependencies d WHERE d.after_id = i.id);
