package main

import (
	"encoding/binary"
	"net"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ackCutter is the scenario's fault: once armed, it closes the tagger's
// connection to RabbitMQ instead of sending the next basic.ack. The
// message's transaction has committed by then (the consumer acks only
// after the commit), so this is the crash every at-least-once consumer
// must survive: the broker never hears the ack and redelivers the message
// on the next connection, where the inbox finds its processed marker.
type ackCutter struct {
	armed atomic.Bool
	cuts  atomic.Int64
}

// arm makes the next basic.ack on the connection cut it.
func (c *ackCutter) arm() { c.armed.Store(true) }

// amqpConfig is the tagger's connection configuration, dialling through c.
func (c *ackCutter) amqpConfig() *amqp.Config {
	dial := amqp.DefaultDial(10 * time.Second)
	return &amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		conn, err := dial(network, addr)
		if err != nil {
			return nil, err
		}
		return &cuttingConn{Conn: conn, cutter: c}, nil
	}}
}

type cuttingConn struct {
	net.Conn
	cutter *ackCutter
}

func (c *cuttingConn) Write(p []byte) (int, error) {
	if c.cutter.armed.Load() && containsMethod(p, 60, 80) && c.cutter.armed.CompareAndSwap(true, false) {
		c.cutter.cuts.Add(1)
		_ = c.Conn.Close()
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

// containsMethod reports whether p, a sequence of whole AMQP frames, holds
// a method frame of the given class and method (basic.ack is 60/80).
func containsMethod(p []byte, class, method uint16) bool {
	for i := 0; i+11 <= len(p); {
		size := int(binary.BigEndian.Uint32(p[i+3:]))
		if p[i] == 1 && binary.BigEndian.Uint16(p[i+7:]) == class && binary.BigEndian.Uint16(p[i+9:]) == method {
			return true
		}
		i += 7 + size + 1
	}
	return false
}
