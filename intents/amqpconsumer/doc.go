// Package amqpconsumer consumes a RabbitMQ queue through the outbox's inbox:
// each delivery runs intents.Client.Consume, keyed on the message's id, so
// a message delivered any number of times has its effects (business writes
// and intents) committed once.
//
// # Acknowledgement
//
// A delivery is acknowledged only after its transaction commits. A
// redelivery of a message already processed (Result.Duplicate) is acked
// with no effect. If the connection is lost after the commit and before the
// ack, the broker redelivers and the redelivery is acked as a duplicate.
//
// # Message ids
//
// The id is the AMQP message-id property or, when that is empty, the string
// value of Config.MessageIDHeader ("x-message-id"). Publishers must set one
// of them, the same on every copy of a logical message (the outbox's
// amqpprovider sets message-id to the intent's idempotency key). A message
// with neither, or with an id intents refuses (over
// intents.MaxMessageIDLength bytes, or not printable), is never processed:
// it is dead-lettered with reason ReasonNoMessageID or
// ReasonInvalidMessageID, or rejected without requeue when there is no
// Config.DeadLetterExchange, and logged.
//
// # Failures and dead-lettering
//
// When the handler returns an error or panics, or records an invalid
// intent, the transaction rolls back and the failure is counted. RabbitMQ
// classic queues do not count requeues, and a nack with requeue puts the
// message back at the head of the queue for an immediate, tight retry; so
// the consumer counts failures itself: it republishes a copy of the message
// to the back of Queue (through the default exchange, with publisher
// confirms) with header HeaderRedeliveries incremented, and acks the
// original only once the copy is confirmed. Once a message has failed
// Config.MaxDeliver times it is published to
// Config.DeadLetterExchange instead, with its original routing key and
// headers HeaderDeadLetterReason (ReasonMaxDeliver), HeaderError (the
// last error), HeaderQueue, HeaderConsumer and HeaderRedeliveries. This
// works the same on classic and quorum queues; a quorum queue's own
// delivery-limit counts only redeliveries after lost connections, which
// this package does not count. The copy keeps the original's body and
// properties; its exchange and routing key are kept in
// HeaderOriginalExchange and HeaderOriginalRoutingKey.
//
// A transaction that fails outside the handler (Postgres unreachable at
// begin or commit) is not the message's fault: the delivery is requeued
// (nack) after Config.ReconnectDelay, without counting.
//
// If a republish or dead-letter publish is not confirmed (the exchange is
// missing or routes nowhere, the connection dropped) the original is
// requeued and the failure logged: a message is never dropped silently.
//
// # Connection
//
// Run connects, consumes with manual acks and basic.qos Config.Prefetch,
// and handles up to Config.Concurrency messages at once. A broker that is
// down at start, refuses the login, lacks the queue or drops the connection
// is retried with exponential backoff (Config.ReconnectDelay up to
// Config.ReconnectDelayMax, with jitter), each attempt logged. When Run's
// context ends it cancels the consumer, lets handlers in flight finish
// (for up to Config.ShutdownGrace), closes the connection (unacked
// prefetched messages return to the queue) and returns ctx.Err().
package amqpconsumer
