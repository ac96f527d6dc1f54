-- Operator actions carry an identity (DESIGN.md, invariant 11): the event
-- an action appends records its action id, and one action id is applied to
-- an intent at most once. An action retried after its commit's
-- acknowledgement was lost (by the store, a client, a double-submitted
-- form) finds its event and is not applied again: a resend whose first
-- run already went out and came back in_doubt is not resent a second time.
ALTER TABLE outbox_events ADD COLUMN action_id text;
CREATE UNIQUE INDEX outbox_events_action_idx ON outbox_events (intent_id, action_id) WHERE action_id IS NOT NULL;
