package pgcluster

import (
	"net"
	"sync"
)

// Gate relays TCP connections to a server, and can hold and then cut them: put
// between a primary and its standby, it makes the standby lag (Hold: what
// the primary sends is no longer delivered) and then lose what it never
// received (Cut), as a standby does behind a slow or broken network.
type Gate struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	held  bool
	cut   bool
	wake  *sync.Cond
	conns []net.Conn
}

// NewGate listens on a free port of 127.0.0.1 and relays every connection
// to target.
func NewGate(target string) (*Gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &Gate{ln: ln, target: target}
	g.wake = sync.NewCond(&g.mu)
	go g.serve()
	return g, nil
}

// Addr is the address to connect to instead of the target's.
func (g *Gate) Addr() string { return g.ln.Addr().String() }

// Hold stops delivering, in both directions: each relay keeps what it has
// read and reads no more, so the other side sees a silent peer.
func (g *Gate) Hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held = true
}

// Cut closes every connection, dropping what Hold kept, and refuses new
// ones: what was held is never delivered.
func (g *Gate) Cut() {
	g.mu.Lock()
	g.cut = true
	conns := g.conns
	g.conns = nil
	g.wake.Broadcast()
	g.mu.Unlock()
	g.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}

func (g *Gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", g.target)
		if err != nil {
			c.Close()
			continue
		}
		g.mu.Lock()
		if g.cut {
			g.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		g.conns = append(g.conns, c, s)
		g.mu.Unlock()
		go g.relay(c, s)
		go g.relay(s, c)
	}
}

// relay copies from src to dst a read at a time, each read delivered only
// while the gate is not held.
func (g *Gate) relay(src, dst net.Conn) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			g.mu.Lock()
			for g.held && !g.cut {
				g.wake.Wait()
			}
			cut := g.cut
			g.mu.Unlock()
			if cut {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
