package adminhttp

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Bounds on failed sign-ins, per client address.
const (
	// LoginFailureBurst is how many sign-ins with a wrong token a client may
	// make in a row before it must wait.
	LoginFailureBurst = 10
	// LoginFailureRefill is how often a client earns one more attempt back,
	// up to LoginFailureBurst: after a burst, one attempt per this period.
	LoginFailureRefill = 6 * time.Second
	// maxLoginClients bounds the clients remembered at once; beyond it the
	// rest share one bucket.
	maxLoginClients = 10000
)

// loginLimiter bounds failed sign-ins with a token bucket per client. Every
// sign-in spends a token before the token is checked (so parallel guesses
// cannot overrun the bucket) and a right one gets it back: only failures
// count. An empty bucket refuses even the right token, or a guess would
// show itself by the answer.
type loginLimiter struct {
	now    func() time.Time
	burst  float64
	refill time.Duration

	mu        sync.Mutex
	buckets   map[string]*tokenBucket
	lastSweep time.Time
}

type tokenBucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

func newLoginLimiter(now func() time.Time) *loginLimiter {
	return &loginLimiter{now: now, burst: LoginFailureBurst, refill: LoginFailureRefill, buckets: map[string]*tokenBucket{}}
}

// overflowKey is the bucket every client shares once maxLoginClients are
// remembered.
const overflowKey = ""

// bucketLocked returns key's bucket brought up to now, creating it full.
func (l *loginLimiter) bucketLocked(key string, now time.Time) *tokenBucket {
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxLoginClients {
			l.sweepLocked(now)
		}
		if len(l.buckets) >= maxLoginClients {
			key = overflowKey
			if b = l.buckets[key]; b != nil {
				l.fill(b, now)
				return b
			}
		}
		b = &tokenBucket{tokens: l.burst, at: now}
		l.buckets[key] = b
		return b
	}
	l.fill(b, now)
	return b
}

func (l *loginLimiter) fill(b *tokenBucket, now time.Time) {
	if elapsed := now.Sub(b.at); elapsed > 0 {
		b.tokens = min(l.burst, b.tokens+float64(elapsed)/float64(l.refill))
	}
	b.at = now
}

// sweepLocked forgets clients whose bucket has filled up again: they are
// no different from a client never seen.
func (l *loginLimiter) sweepLocked(now time.Time) {
	for k, b := range l.buckets {
		l.fill(b, now)
		if b.tokens >= l.burst {
			delete(l.buckets, k)
		}
	}
	l.lastSweep = now
}

// take spends one sign-in attempt of client key. When none is left it
// returns false and how long until the next one.
func (l *loginLimiter) take(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.lastSweep) > time.Duration(l.burst)*l.refill {
		l.sweepLocked(now)
	}
	b := l.bucketLocked(key, now)
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) * float64(l.refill))
	}
	b.tokens--
	return true, 0
}

// refund gives back the attempt a successful sign-in took.
func (l *loginLimiter) refund(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[key]
	if b == nil {
		b = l.buckets[overflowKey]
	}
	if b != nil {
		l.fill(b, now)
		b.tokens = min(l.burst, b.tokens+1)
	}
}

// clientKey names the client of r for rate limiting: its IP address, or
// for IPv6 its /64 network (one host commonly holds a whole /64).
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return host
	case ip.To4() != nil:
		return ip.To4().String()
	default:
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
}
