//go:build benchpeers

package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
)

// Watermill's SQL outbox, set up as its documentation shows: the consumer
// publishes with a Publisher over its own transaction
// (sql.TxFromPgx(tx), DefaultPostgreSQLSchema, AutoInitializeSchema off as
// a transaction requires), and a Subscriber of a consumer group
// (DefaultPostgreSQLOffsetsAdapter, the schema initialized on subscribe)
// hands messages to a handler that calls the double over HTTP and acks.
//
// A subscription delivers its messages one at a time, in order: the next
// message is handed over once the previous one is acked, and offsets are
// acked per batch read (SubscribeBatchSize, default 100). Its concurrency is
// therefore one call at a time, whatever the workers.

// watermillPollInterval replaces Watermill's default PollInterval (1 s):
// with no notification, polling is its only wake-up, and a 1 s poll alone
// misses a 50 ms p99 at any rate.
const watermillPollInterval = 10 * time.Millisecond

const watermillTopic = "bench_payments"

func watermillPeer() e2ePeer {
	return e2ePeer{
		key:  "watermill",
		name: "Watermill SQL",
		setup: fmt.Sprintf("watermill-sql %s (watermill %s): Publisher over the consumer's pgx transaction, DefaultPostgreSQLSchema and DefaultPostgreSQLOffsetsAdapter, "+
			"one Subscriber (consumer group) whose handler calls the double over HTTP and acks; defaults (SubscribeBatchSize 100, AckDeadline 30 s) except PollInterval %s (default 1 s); "+
			"a subscription handles one message at a time",
			moduleVersion("github.com/ThreeDotsLabs/watermill-sql/v4"), moduleVersion("github.com/ThreeDotsLabs/watermill"), watermillPollInterval),
		start: startWatermill,
	}
}

type watermillSystem struct {
	env    *e2eEnv
	schema wsql.DefaultPostgreSQLSchema
	sub    *wsql.Subscriber
	caller *doubleCaller
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startWatermill(ctx context.Context, env *e2eEnv) (e2eSystem, error) {
	logger := watermill.NopLogger{}
	s := &watermillSystem{env: env, schema: wsql.DefaultPostgreSQLSchema{}, caller: newDoubleCaller(env.dbl.StripeURL(), 4)}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(env.db.pool), wsql.SubscriberConfig{
		ConsumerGroup:    "bench",
		SchemaAdapter:    s.schema,
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     watermillPollInterval,
	}, logger)
	if err != nil {
		return nil, err
	}
	s.sub = sub
	subCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	msgs, err := sub.Subscribe(subCtx, watermillTopic)
	if err != nil {
		cancel()
		return nil, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for msg := range msgs {
			seq, err := strconv.ParseInt(string(msg.Payload), 10, 64)
			if err == nil {
				err = s.caller.pay(msg.Context(), seq)
			}
			if err != nil {
				env.r.cfg.Logger.Error("watermill handler", "err", err)
				msg.Nack()
				continue
			}
			msg.Ack()
		}
	}()
	return s, nil
}

func (s *watermillSystem) consume(ctx context.Context, seq int64) (int64, error) {
	err := pgx.BeginFunc(ctx, s.env.consumers, func(tx pgx.Tx) error {
		if err := insertMarker(ctx, tx, seq); err != nil {
			return err
		}
		if err := insertBusinessRow(ctx, tx, seq); err != nil {
			return err
		}
		pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: s.schema}, watermill.NopLogger{})
		if err != nil {
			return err
		}
		return pub.Publish(watermillTopic, message.NewMessage(watermill.NewUUID(), []byte(strconv.FormatInt(seq, 10))))
	})
	return seq, err
}

func (s *watermillSystem) stop(context.Context) error {
	err := s.sub.Close()
	s.cancel()
	s.wg.Wait()
	s.caller.close()
	return err
}
