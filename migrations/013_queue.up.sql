-- The intent row is the dispatchers' queue entry (docs/DESIGN.md, "The
-- queue"): recording writes no River job. A dispatcher claims a batch of
-- queued pending intents in one statement, committed before any call, and
-- River keeps what needs a later time: a retry after its backoff, the
-- take-over of a claim whose dispatcher stopped, the look-ups of in_doubt
-- intents, and the maintenance. Every unfinished intent belongs to one of
-- the two at a time: queued (the queue claims it while pending; its
-- claimer holds it while dispatching) or not (a River dispatch job, or
-- nothing but the sweep, the re-checks and the operators).

-- Reads and writes of outbox_intents wait while the index is rebuilt (a
-- few seconds per million unfinished intents).
LOCK TABLE outbox_intents IN ACCESS EXCLUSIVE MODE;

-- Intents recorded before this migration keep the River jobs they have
-- (the sweep gives a job to any that lost one): they are not queued.
ALTER TABLE outbox_intents ADD COLUMN queued boolean NOT NULL DEFAULT false;
ALTER TABLE outbox_intents ADD CONSTRAINT outbox_intents_queued_check
    CHECK (NOT queued OR state IN ('pending', 'dispatching'));

-- The claim that holds a dispatching intent, told apart from every other:
-- a dispatcher that lost the answer to its claim finds what it claimed by
-- it (intentstore.ReleaseUnsent).
ALTER TABLE outbox_intents ADD COLUMN claim_token bigint;

-- When the latest attempt was claimed: how old a claim is (the sweep takes
-- over a queued one whose dispatcher stopped), and when the latest request
-- may have left (a look-up's absence settle time).
ALTER TABLE outbox_intents ADD COLUMN attempt_started_at timestamptz;
UPDATE outbox_intents i SET attempt_started_at = a.started
FROM (SELECT intent_id, max(started_at) AS started FROM outbox_attempts GROUP BY intent_id) a
WHERE a.intent_id = i.id;

-- The queue is the front of this index: each provider's queued intents in
-- id order, so that a dispatcher reads only the providers it serves. The
-- claim changes none of its columns, so it is a HOT update when the page
-- has room; the rest of the unfinished intents (in_doubt, waiting, those
-- River holds) are its other half, which lists of them read without the
-- queue's backlog.
DROP INDEX outbox_intents_unfinished_idx;
CREATE INDEX outbox_intents_unfinished_idx ON outbox_intents (queued, provider, id) WHERE finished_at IS NULL;
