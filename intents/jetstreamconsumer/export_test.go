package jetstreamconsumer

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// HandleForTest handles one message as Run would, so a test can hand it a
// message whose ack path it controls.
func (c *Consumer) HandleForTest(ctx context.Context, msg jetstream.Msg) { c.handle(ctx, msg) }

// ConsumerConfigForTest is the durable consumer's configuration as Run
// creates it.
func (c *Consumer) ConsumerConfigForTest() jetstream.ConsumerConfig { return c.consumerConfig() }
