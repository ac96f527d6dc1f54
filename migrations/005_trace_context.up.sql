-- The W3C trace context (traceparent, and tracestate when there is one) of
-- the span that recorded an intent: the consumer's, or the caller's for
-- RecordTx. Written at insert, read when the intent is dispatched, so each
-- attempt's span links back to the trace that recorded it. NULL when
-- nothing was traced. Never searched, so not indexed.
ALTER TABLE outbox_intents
    ADD COLUMN trace_parent text,
    ADD COLUMN trace_state text;
