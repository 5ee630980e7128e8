package slowpath

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOncePerPeerAndReason: a line per peer and reason however many transfers, again after Forget.
func TestOncePerPeerAndReason(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var l Log
	var wg sync.WaitGroup
	var mu sync.Mutex
	logged := 0
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l.Once(log, "slow", 1, "no_offer") {
				mu.Lock()
				logged++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, logged, "concurrent transfers log one line")
	assert.True(t, l.Once(log, "slow", 1, "budget"), "another reason logs")
	assert.True(t, l.Once(log, "slow", 2, "no_offer"), "another peer logs")
	assert.False(t, l.Once(log, "slow", 2, "no_offer"))
	l.Forget(1)
	assert.True(t, l.Once(log, "slow", 1, "no_offer"), "logged again after Forget")
	assert.Equal(t, 4, strings.Count(buf.String(), "msg=slow"))
	assert.Contains(t, buf.String(), "peer=0000000000000001 reason=no_offer")
	assert.False(t, l.Once(nil, "slow", 3, "no_offer"), "no logger, no line")
}
