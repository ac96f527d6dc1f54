// Package intents is the consumer side of the outbox: it makes a message
// handler idempotent and records the external effects it wants as intents,
// all in one Postgres transaction.
//
// A consumer calls Client.Consume with the message's id, its own name and a
// handler. Consume inserts a processed marker (consumer, message id) first;
// a redelivery conflicts on the marker's primary key and returns a Result
// with Duplicate set, running nothing. Otherwise the handler runs with the
// transaction, makes its own writes through it and records intents with the
// Recorder. When the handler returns nil, the intents are validated, stored
// with their idempotency keys and queued for the dispatchers, and everything
// commits together. If anything fails (or the handler panics) nothing is
// written and the message can be redelivered.
//
// Concurrent deliveries of one message are serialised by the marker's unique
// index: the second insert waits for the first transaction and, once it
// commits, finds the conflict. There is no check-then-insert race.
//
// An intent's idempotency key is derived from the message: "consumer:message"
// when the handler records one intent, "consumer:message:name" for each when
// it records several (each then needs a distinct Name). The consumer's name
// is part of the key so that two consumers of one message never collide. The
// dispatcher passes the key to providers that accept one, so a retried call
// is answered with the first call's result.
//
// A consumer that receives messages in batches can process a whole batch
// in one transaction with Client.ConsumeBatch: each message still gets its
// own marker and duplicate detection, the batch commits or rolls back as a
// whole, and it costs three round trips however many messages it holds.
//
// An intent may come after others (Intent.After: a refund after its charge,
// taking the charge's PaymentIntent id from its result) and may belong to a
// stream whose intents are performed one at a time, in recorded order
// (Intent.OrderingKey). Until its turn it is waiting; the transaction that
// finishes the last intent it waits for releases it, or cancels it, with
// the reason, when one it comes after failed or was cancelled.
//
// Code that records intents outside a message consumer (an HTTP handler that
// creates a note and publishes NoteCreated) uses RecordTx inside its own
// transaction.
package intents
