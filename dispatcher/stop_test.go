package dispatcher_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
)

// downProxy forwards to Postgres until down, then closes every connection
// and refuses new ones: the database became unreachable.
type downProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func newDownProxy(t *testing.T, target string) *downProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &downProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go p.serve(target)
	return p
}

func (p *downProxy) serve(target string) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		s, err := net.Dial("tcp", target)
		if down || err != nil {
			c.Close()
			if s != nil {
				s.Close()
			}
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); s.Close() }()
		go func() { _, _ = io.Copy(c, s); c.Close() }()
	}
}

func (p *downProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Stop keeps to its context while the database is unreachable: what the
// dispatcher would retry for SettleRetryFor (a lost claim's release among
// them) gives up when Stop's context ends, and Stop returns its error.
func TestStopKeepsToItsContextWhileTheDatabaseIsDown(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	proxy := newDownProxy(t, b.pool.Config().ConnConfig.Host+":"+strconv.Itoa(int(b.pool.Config().ConnConfig.Port)))
	pcfg := b.pool.Config().Copy()
	host, port, _ := net.SplitHostPort(proxy.ln.Addr().String())
	p, _ := strconv.Atoi(port)
	pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, pcfg.ConnConfig.ConnectTimeout = host, uint16(p), time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg := b.config()
	cfg.SettleRetryFor = time.Minute
	d, err := dispatcher.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.record(t, "sendgrid.email", emailPayload) // the queue is fetching
	proxy.cut()
	time.Sleep(200 * time.Millisecond) // polls meet the closed connections
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = d.Stop(ctx)
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("Stop took %s with a 2s context (SettleRetryFor %s), err %v", took.Round(time.Second), cfg.SettleRetryFor, err)
	}
}
