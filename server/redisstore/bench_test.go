package redisstore_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testredis"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/redisstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// benchResponse is the stored response of the benchmarks: a small JSON
// payment.
var benchResponse = &server.StoredResponse{
	Status: http.StatusCreated,
	Header: http.Header{"Content-Type": {"application/json"}},
	Body:   []byte(`{"id":"pay_0123456789","amount":4000,"currency":"usd","status":"succeeded"}`),
}

// BenchmarkRedis compares the store with the bare baseline of the article
// on the same Redis, in one run: a new key is a claim and its completion
// (SET NX PX, then SET of the response with KEEPTTL), a replay is a claim
// of a completed key (SET NX GET: refused, with the stored value).
//
//	IDEM_TEST_REDIS=redis://127.0.0.1:6379/0 go test -run '^$' -bench BenchmarkRedis -benchtime 3s ./server/redisstore/
func BenchmarkRedis(b *testing.B) {
	client, prefix := testredis.Shared(b)
	store, err := redisstore.New(client, &redisstore.Config{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var n atomic.Int64
	fresh := func() string { return "k-" + strconv.FormatInt(n.Add(1), 10) }
	scope := func(key string) server.Scope {
		return server.Scope{Principal: "bench", Endpoint: "POST /payments", Key: key}
	}
	claim := func(key string) (server.ClaimResult, error) {
		now := time.Now()
		return store.Claim(ctx, server.ClaimRequest{Scope: scope(key), Fingerprint: storetest.BenchFingerprint, FingerprintVersion: 1,
			Now: now, LockedUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Hour)})
	}
	storeNew := func() error {
		key := fresh()
		res, err := claim(key)
		if err != nil {
			return err
		}
		if !res.Acquired {
			return errors.New("fresh key not acquired")
		}
		return store.Complete(ctx, scope(key), res.Token, time.Now(), benchResponse)
	}
	bareKey := func(key string) string { return prefix + "bare:" + key }
	bareNew := func() error {
		key := bareKey(fresh())
		ok, err := client.SetNX(ctx, key, storetest.BenchFingerprint, time.Hour).Result()
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("fresh key not set")
		}
		return client.SetArgs(ctx, key, benchResponse.Body, redis.SetArgs{KeepTTL: true}).Err()
	}

	// The replay cells read completed keys of their own.
	const replayKeys = 1024
	storeDone := make([]string, replayKeys)
	bareDone := make([]string, replayKeys)
	for i := range replayKeys {
		key := fresh()
		res, err := claim(key)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Complete(ctx, scope(key), res.Token, time.Now(), benchResponse); err != nil {
			b.Fatal(err)
		}
		storeDone[i] = key
		bareDone[i] = bareKey(key)
		if err := client.Set(ctx, bareDone[i], benchResponse.Body, time.Hour).Err(); err != nil {
			b.Fatal(err)
		}
	}
	var r atomic.Int64
	storeReplay := func() error {
		res, err := claim(storeDone[r.Add(1)%replayKeys])
		if err == nil && (res.Acquired || res.Existing.Response == nil) {
			err = errors.New("replay did not find the stored response")
		}
		return err
	}
	bareReplay := func() error {
		v, err := client.SetArgs(ctx, bareDone[r.Add(1)%replayKeys], storetest.BenchFingerprint, redis.SetArgs{Mode: "NX", TTL: time.Hour, Get: true}).Result()
		if err == nil && v == "" {
			err = errors.New("replay did not find the stored value")
		}
		return err
	}

	for _, cell := range []struct {
		name string
		op   func() error
	}{
		{"NewKey/Store", storeNew},
		{"NewKey/BareSetNX", bareNew},
		{"Replay/Store", storeReplay},
		{"Replay/BareSetNX", bareReplay},
	} {
		b.Run(cell.name+"/Serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := cell.op(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(cell.name+"/Parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := cell.op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
