package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/redisstore"
)

// redisModes are the server modes on Redis (-redis): the effect is the same
// PostgreSQL insert as every other mode's, the idempotency record is in
// Redis, under a key prefix of this run's own (deleted at the end).
//
//   - redis-handwritten, Redis's own baseline: the article's bare pattern,
//     SET k "p"+fingerprint NX PX 24h (the claim), the insert, then
//     SET k "c"+response KEEPTTL (the completion); a claim refused is
//     answered by a GET of the stored response;
//   - redis-lease: idemkit's ModeLease on redisstore.Store.
func redisModes(ctx context.Context, env *pgEnv, url string, pool int) ([]serverMode, func(), error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	opts.PoolSize = pool
	opts.ContextTimeoutEnabled = true
	client := redis.NewClient(opts)
	prefix := "bench:" + env.schema + ":"
	closeRedis := func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		iter := client.Scan(cctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(cctx) {
			client.Del(cctx, iter.Val())
		}
		_ = client.Close()
	}
	store, err := redisstore.New(client, &redisstore.Config{Prefix: prefix})
	if err != nil {
		closeRedis()
		return nil, nil, err
	}
	principal := func(r *http.Request) (string, error) { return r.Header.Get(headerAcct), nil }
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	leaseMW, err := server.New(store, &server.Config{PrincipalFunc: principal, Mode: server.ModeLease, Logger: quiet})
	if err != nil {
		closeRedis()
		return nil, nil, err
	}
	onPool := func(*http.Request) execer { return env.pool }
	return []serverMode{
		{name: redisBaseline, handler: &redisHandwritten{client: client, env: env, prefix: prefix + "hw:"}, replays: true, section: "redis"},
		{name: "redis-lease", handler: leaseMW.Wrap(paymentHandler("redis-lease", onPool)), replays: true, section: "redis"},
	}, closeRedis, nil
}

// redisBaseline is the redis section's baseline: SET NX PX for the claim,
// SET KEEPTTL for the completion.
const redisBaseline = "redis-handwritten"

// redisHandwritten is the idempotent POST on Redis as one writes it by hand.
type redisHandwritten struct {
	client *redis.Client
	env    *pgEnv
	prefix string
}

func (h *redisHandwritten) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, principal := r.Header.Get(server.HeaderKey), r.Header.Get(headerAcct)
	if key == "" || principal == "" {
		http.Error(w, "Idempotency-Key and X-Account are required", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fp := sha256.Sum256(body)
	k := h.prefix + principal + "\x00" + key
	claimed, err := h.client.SetNX(ctx, k, append([]byte("p"), fp[:]...), 24*time.Hour).Result()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !claimed {
		stored, err := h.client.Get(ctx, k).Bytes()
		switch {
		case errors.Is(err, redis.Nil):
			http.Error(w, "released: retry", http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case len(stored) > 0 && stored[0] == 'p':
			if !bytes.Equal(stored[1:], fp[:]) {
				http.Error(w, "key reused with a different request", http.StatusUnprocessableEntity)
				return
			}
			http.Error(w, "in flight", http.StatusConflict)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set(wire.HeaderReplayed, "true")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(stored[1:])
		}
		return
	}
	resp, err := payment(ctx, h.env.pool, "redis-handwritten", r, body)
	if err != nil {
		h.client.Del(context.WithoutCancel(ctx), k)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if err := h.client.SetArgs(ctx, k, append([]byte("c"), resp...), redis.SetArgs{KeepTTL: true}).Err(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeCreated(w, resp)
}
