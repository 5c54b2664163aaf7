package main

import (
	"context"
	"database/sql"

	"maragu.dev/goqite"
)

// goqite is a test-only dependency of the module: it is registered here, in
// the test binary, so that `go build ./...` and the command's import graph
// never include it, while `go test ./bench` (CI's short run and TestFullRun)
// compiles and measures it.
func init() {
	registeredEnqueuers = append(registeredEnqueuers, enqueuer{name: "goqite-send", open: openGoqite})
}

// goqiteSchema is schema_sqlite.sql of maragu.dev/goqite v0.4.0 (the module
// does not export it).
const goqiteSchema = `create table goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;

create trigger goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;

create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);`

// openGoqite queues with goqite's Queue.Send on the baseline's SQLite
// settings and pool.
func openGoqite(ctx context.Context, path string) (queue, error) {
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		return queue{}, err
	}
	db.SetMaxOpenConns(sqliteConns)
	if _, err := db.ExecContext(ctx, goqiteSchema); err != nil {
		_ = db.Close()
		return queue{}, err
	}
	q := goqite.New(goqite.NewOpts{DB: db, Name: "charges"})
	return queue{
		send: func(ctx context.Context, body []byte) error { return q.Send(ctx, goqite.Message{Body: body}) },
		rows: func(ctx context.Context) (int64, error) {
			defer db.Close()
			return countRows(ctx, db, "goqite")
		},
	}, nil
}
