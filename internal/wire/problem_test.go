package wire

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProblemSlug_InvertsProblemType(t *testing.T) {
	t.Parallel()
	for slug := range problemTitles {
		got, ok := ProblemSlug(ProblemType(slug))
		require.True(t, ok, slug)
		require.Equal(t, slug, got)
		require.NotEmpty(t, ProblemTitle(slug), slug)
	}
	for _, uri := range []string{
		"", "about:blank", ProblemTypeBase, ProblemTypeBase + "no-such-slug",
		"https://example.com/problems#key-reused", ProblemTypeBase + "key-reused/x",
	} {
		slug, ok := ProblemSlug(uri)
		require.False(t, ok, "ProblemSlug(%q) = %q", uri, slug)
		require.Empty(t, slug)
	}
	require.Empty(t, ProblemTitle("no-such-slug"))
}

func TestProblemType(t *testing.T) {
	t.Parallel()
	require.Equal(t, "https://github.com/idemkit/idemkit/blob/main/docs/problems.md#key-reused", ProblemType(ProblemKeyReused))
	require.Len(t, problemTitles, 17, "every Problem* constant has a title")
}

// Every problem type URI must resolve to a section of docs/problems.md.
func TestProblemTypes_Documented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "problems.md"))
	require.NoError(t, err)
	for slug, title := range problemTitles {
		require.NotEmpty(t, title)
		require.Contains(t, string(doc), "\n## "+slug+"\n", "docs/problems.md needs a section for %s", slug)
		require.Regexp(t, `^[a-z]+(-[a-z]+)*$`, slug, "a slug must be its own GitHub anchor")
	}
}
