#!/usr/bin/env bash
# tests/readme_words.sh: the READMEs stay short enough to read: the top README at most 1,500 words of prose, each
# stage README at most 1,800. Prose: every line outside fenced code and outside the generated blocks (<!-- name
# begin --> ... <!-- name end -->, bench/make_tables.py writes them; a student copy's withheld ones). Two kinds of
# marked block count all the same, being written by hand: <!-- predictions begin --> ... <!-- predictions end -->
# (the stage's predictions table) and <!-- measured begin --> ... <!-- measured end --> (prose on measured figures,
# which a student copy withholds); their marker lines do not count. READMEs named in PENDING are reported, not
# failed: they are still to be cut. Last line: "words: N passed, N failed, N skipped".
set -u
PENDING=""
passed=0 failed=0 skipped=0

prose_words() {
    awk '/^```/ { fence = !fence; next }
         /<!-- (predictions|measured) (begin|end) -->/ { next }
         /<!-- .* begin -->/ { gen = 1 }
         !gen && !fence { print }
         /<!-- .* end -->/ { gen = 0 }' "$1" | wc -w
}

for file in README.md 0[2-9]-*/README.md; do
    [ -f "$file" ] || continue
    limit=1800; [ "$file" = README.md ] && limit=1500
    words=$(prose_words "$file")
    if [ "$words" -le "$limit" ]; then
        echo "ok    $file: $words words of prose (at most $limit)"; passed=$((passed + 1))
    elif [[ " $PENDING " == *" $file "* ]]; then
        echo "SKIP  $file: $words words of prose, over $limit: still to be cut"; skipped=$((skipped + 1))
    else
        echo "FAIL  $file: $words words of prose, over $limit"; failed=$((failed + 1))
    fi
done
echo "words: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
