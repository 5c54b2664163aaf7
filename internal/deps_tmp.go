package internal
import (
 _ "github.com/google/uuid"
 _ "github.com/hashicorp/go-retryablehttp"
 _ "github.com/jackc/pgx/v5/pgxpool"
 _ "github.com/jackc/pgerrcode"
 _ "modernc.org/sqlite"
 _ "github.com/spf13/cobra"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/stretchr/testify/require"
 _ "go.uber.org/goleak"
)

