package sqlstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A paced Sweep's pause between chunks ends with its context: a canceled
// sweep does not wait out the pause.
func TestPause_EndsWithTheContext(t *testing.T) {
	t.Parallel()
	require.NoError(t, pause(context.Background(), time.Millisecond))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	require.ErrorIs(t, pause(ctx, time.Hour), context.Canceled)
	require.Less(t, time.Since(start), time.Minute, "got a pause that waited, want one that ended with its context")
}
