package testkit_test

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testkit"
)

// methodFrame is an AMQP method frame for class/method with an empty body.
func methodFrame(class, method uint16) []byte {
	f := []byte{1, 0, 0, 0, 0, 0, 4}
	f = binary.BigEndian.AppendUint16(f, class)
	f = binary.BigEndian.AppendUint16(f, method)
	return append(f, 0xCE)
}

func TestContainsAMQPMethodFindsAFrameAfterOthers(t *testing.T) {
	t.Parallel()
	p := append(methodFrame(60, 40), methodFrame(60, 80)...)
	if !testkit.ContainsAMQPMethod(p, 60, 80) {
		t.Error("basic.ack after basic.publish not found")
	}
	if testkit.ContainsAMQPMethod(p, 60, 90) {
		t.Error("found basic.reject, which is not there")
	}
}

func TestSyncBufferCountsWhatWasWritten(t *testing.T) {
	t.Parallel()
	logger, buf := testkit.Logger()
	logger.Debug("retrying")
	logger.Info("retrying")
	if n := buf.Count("retrying"); n != 2 {
		t.Errorf("Count = %d, want 2 in %q", n, buf.String())
	}
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	calls := 0
	testkit.Eventually(t, 5*time.Second, "the third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Errorf("cond called %d times, want 3", calls)
	}
}

func TestUniqueNameDiffersPerCallAndNamesTheTest(t *testing.T) {
	t.Parallel()
	a, b := testkit.UniqueName(t, "q"), testkit.UniqueName(t, "q")
	if a == b || !strings.HasPrefix(a, "outbox-test.q.TestUniqueNameDiffersPerCallAndNamesTheTest.") {
		t.Errorf("names %q and %q", a, b)
	}
}

func TestClockMovesOnlyWhenAdvancedOrWithRealTime(t *testing.T) {
	at := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	stopped := testkit.NewClock(at)
	stopped.Advance(time.Hour)
	if got := stopped.Now(); !got.Equal(at.Add(time.Hour)) {
		t.Fatalf("stopped clock = %s, want %s", got, at.Add(time.Hour))
	}
	running := testkit.NewRunningClock()
	running.Advance(24 * time.Hour)
	if ahead := time.Until(running.Now()); ahead < 23*time.Hour || ahead > 25*time.Hour {
		t.Fatalf("running clock is %s ahead of real time, want 24h", ahead)
	}
}
