package testkit

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// LostAckProxy is a TCP proxy in front of PostgreSQL that can lose a
// commit's acknowledgement: armed, it forwards the next COMMIT a client
// sends (pgx sends it as a simple query), or the next statement whose SQL
// holds a given text (simple, or extended: by the name it was prepared
// under), waits for the server's answer up to ReadyForQuery, and closes the
// client's connection instead of passing it on. The transaction (explicit,
// or the implicit one of a batch) is committed; the client cannot know.
// Everything else is passed through unchanged. It needs sslmode=disable.
type LostAckProxy struct {
	t     *testing.T
	ln    net.Listener
	dst   string
	armed atomic.Int64
	lost  atomic.Int64
	wg    sync.WaitGroup

	mu       sync.Mutex
	stmtText string // ArmStatement's text
	stmtLeft int
}

// NewLostAckProxy starts a proxy to the server at addr ("127.0.0.1:5432"),
// closed when t ends.
func NewLostAckProxy(t *testing.T, addr string) *LostAckProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &LostAckProxy{t: t, ln: ln, dst: addr}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

// Addr is the proxy's address, to put in a database URL's host and port.
func (p *LostAckProxy) Addr() string { return p.ln.Addr().String() }

// Arm makes the next n commits through the proxy lose their
// acknowledgement.
func (p *LostAckProxy) Arm(n int) { p.armed.Store(int64(n)) }

// ArmStatement makes the answers to the next n statements whose SQL holds
// text be lost, after the server ran them.
func (p *LostAckProxy) ArmStatement(text string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stmtText, p.stmtLeft = text, n
}

// takeStatement reports whether sql is an armed statement, counting it.
func (p *LostAckProxy) takeStatement(sql string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stmtLeft <= 0 || !strings.Contains(sql, p.stmtText) {
		return false
	}
	p.stmtLeft--
	return true
}

// Lost counts the acknowledgements lost so far.
func (p *LostAckProxy) Lost() int { return int(p.lost.Load()) }

func (p *LostAckProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.dst)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.wg.Add(2)
		committing := make(chan struct{}, 1)
		go func() { defer p.wg.Done(); p.fromClient(c, s, committing) }()
		go func() { defer p.wg.Done(); p.fromServer(s, c, committing) }()
	}
}

var commitQuery = []byte("commit\x00")

// fromClient forwards the client's messages, noting an armed COMMIT.
func (p *LostAckProxy) fromClient(c, s net.Conn, committing chan<- struct{}) {
	defer s.Close()
	defer c.Close()
	// The startup message has no type byte: a length, then the rest.
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return
	}
	rest := make([]byte, binary.BigEndian.Uint32(n[:])-4)
	if _, err := io.ReadFull(c, rest); err != nil {
		return
	}
	if _, err := s.Write(append(n[:], rest...)); err != nil {
		return
	}
	prepared := map[string]string{} // statement name -> SQL
	for {
		var head [5]byte
		if _, err := io.ReadFull(c, head[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(head[1:])-4)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		lose := false
		switch head[0] {
		case 'Q':
			lose = (bytes.EqualFold(body, commitQuery) && p.armed.Add(-1) >= 0) || p.takeStatement(string(body))
		case 'P': // Parse: name, query
			if name, rest, ok := bytes.Cut(body, []byte{0}); ok {
				query, _, _ := bytes.Cut(rest, []byte{0})
				prepared[string(name)] = string(query)
			}
		case 'B': // Bind: portal, statement
			if _, rest, ok := bytes.Cut(body, []byte{0}); ok {
				name, _, _ := bytes.Cut(rest, []byte{0})
				lose = p.takeStatement(prepared[string(name)])
			}
		}
		if lose {
			select {
			case committing <- struct{}{}:
			default: // already losing this exchange
			}
		}
		if _, err := s.Write(append(head[:], body...)); err != nil {
			return
		}
	}
}

// fromServer forwards the server's messages; after an armed COMMIT, it
// reads the server's answer up to ReadyForQuery and closes the client's
// connection instead of forwarding it.
func (p *LostAckProxy) fromServer(s, c net.Conn, committing <-chan struct{}) {
	defer c.Close()
	defer s.Close()
	for {
		var head [5]byte
		if _, err := io.ReadFull(s, head[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(head[1:])-4)
		if _, err := io.ReadFull(s, body); err != nil {
			return
		}
		select {
		case <-committing:
			// The answer to the COMMIT: CommandComplete, then
			// ReadyForQuery. Swallow both and hang up.
			for head[0] != 'Z' {
				if _, err := io.ReadFull(s, head[:]); err != nil {
					return
				}
				body = make([]byte, binary.BigEndian.Uint32(head[1:])-4)
				if _, err := io.ReadFull(s, body); err != nil {
					return
				}
			}
			p.lost.Add(1)
			return
		default:
		}
		if _, err := c.Write(append(head[:], body...)); err != nil {
			return
		}
	}
}

// LostAckPool returns a pool on pool's database through a new
// LostAckProxy, and the proxy; both are closed when t ends.
func LostAckPool(t *testing.T, pool *pgxpool.Pool) (*pgxpool.Pool, *LostAckProxy) {
	t.Helper()
	cfg := pool.Config().Copy()
	proxy := NewLostAckProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
	out, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(out.Close)
	return out, proxy
}
