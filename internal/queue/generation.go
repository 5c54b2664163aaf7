package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// A queue restored in place from an older backup (same host, same path)
// passes the instance check, and its intents that were not sent when the
// backup was taken look unsent: sending them again, after the server's
// window, runs the handler twice. The queue therefore counts generations:
// every first attempt of an intent adds one, in the queue
// (idemkit_instance.generation, in the claim's transaction) and, before
// the first byte is sent, in a file next to the queue, <queue>-generation.
// A queue opened with a generation behind that file's was restored from
// an older copy: its pending intents that had never been attempted are
// held like a copied queue's (Error.Foreign; Adopt sends them), and Open logs it.
//
// What this cannot detect: a backup restored together with its
// -generation file (restore the queue file alone, or delete it before); a
// -generation file lost or not writable (the directory is read-only); a
// restore taken after the last first attempt (nothing is at risk then:
// intents attempted before keep their horizon, and the horizon bounds
// them); the last first attempt before a power cut, when the -generation
// file was not yet on disk (it is written, not fsynced). Intents held by
// it that were never sent after the backup either need Adopt all the same.

// generationSuffix names the file next to the queue.
const generationSuffix = "-generation"

// restoredMark is appended to the instance of the intents a restore holds.
const restoredMark = "#restored-from-backup"

// sqlBumpGeneration adds one to the queue's generation.
const sqlBumpGeneration = `UPDATE idemkit_instance SET generation = generation + 1 WHERE id = 1 RETURNING generation`

// readGeneration reads the -generation file: 0 if it is missing or does
// not parse.
func readGeneration(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	g, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || g < 0 {
		return 0
	}
	return g
}

// noteGeneration writes g to the -generation file unless it holds a
// larger one already. Errors are ignored: the file only helps detect a
// restore.
func (q *Queue) noteGeneration(g int64) {
	if q.genPath == "" || g <= readGeneration(q.genPath) {
		return
	}
	tmp := q.genPath + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(g, 10)+"\n"), 0o600); err != nil {
		return
	}
	if err := os.Rename(tmp, q.genPath); err != nil {
		_ = os.Remove(tmp)
	}
}

// CheckRestored compares the queue's generation with the -generation file
// next to it (file is the queue's path). Behind: the queue was restored
// from an older copy; its never-attempted pending intents are held (their
// instance marked) and it returns how many, and the two generations.
func (q *Queue) CheckRestored(ctx context.Context, file string, now string) (held int64, inFile, onDisk int64, err error) {
	q.genPath = file + generationSuffix
	onDisk = readGeneration(q.genPath)
	err = q.InTx(ctx, func(ex execer) error {
		if err := ex.QueryRowContext(ctx, `SELECT generation FROM idemkit_instance WHERE id = 1`).Scan(&inFile); err != nil {
			return err
		}
		if onDisk <= inFile {
			return nil
		}
		mark := fmt.Sprintf("%s%s-generation-%d-of-%d", q.self, restoredMark, inFile, onDisk)
		res, err := ex.ExecContext(ctx, `UPDATE idemkit_intents SET instance = ?1, updated_at = ?4
			WHERE state = 'pending' AND first_attempt_at IS NULL AND COALESCE(instance, ?2) = ?3`, mark, q.origin, q.self, now)
		if err != nil {
			return err
		}
		held, _ = res.RowsAffected()
		// The queue goes on from the generation it had reached.
		_, err = ex.ExecContext(ctx, `UPDATE idemkit_instance SET generation = ? WHERE id = 1`, onDisk)
		return err
	})
	if err == nil && onDisk < inFile {
		q.noteGeneration(inFile)
	}
	return held, inFile, onDisk, err
}

// bumpGeneration adds one to the generation in ex (a claim of an intent's
// first attempt) and returns the new value.
func bumpGeneration(ctx context.Context, ex execer) (int64, error) {
	var g int64
	err := ex.QueryRowContext(ctx, sqlBumpGeneration).Scan(&g)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return g, err
}
