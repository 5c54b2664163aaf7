// Package migrate is the one migration runner of idemkit: the client's
// queue file, the server's stores and the example payments API all apply
// their embedded, numbered schema files through it.
//
// A migration is a file NNN_description.up.sql (Load). Run applies, in
// order and under the database's exclusive migration lock (a Target), every
// migration above the highest version the database records, and refuses a
// database migrated by a newer release (ErrNewerSchema). SQLTarget is the
// Target for a database/sql database (SQLite); a PostgreSQL Target lives with
// the PostgreSQL driver, so that a SQLite user links no pgx.
//
// The package is internal: its API may change with any commit.
package migrate
