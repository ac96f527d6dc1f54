-- Ordering is decided in Go (internal/intentstore, order.go): the
-- recorder decides each ordered intent's state from its predecessors,
-- read under their locks, and inserts it in that state with its event and
-- dependencies; a settlement's transaction cancels down the chain and
-- releases with statements the store queues in its batch. The plpgsql
-- functions of migrations 006 and 008 that did it are no longer called.
-- A database migrated down to 010 gets them back for the binaries that
-- call them.
DROP FUNCTION outbox_order_record(jsonb);
DROP FUNCTION outbox_order_settled(bigint, text);
DROP FUNCTION outbox_order_fill(jsonb, jsonb, text);
