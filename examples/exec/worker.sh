#!/bin/sh
# A leafline exec-sink worker in POSIX sh: stores each event as
# DIR/<event_id>.json. The file is written under a temporary name and moved
# into place, so a file that exists is complete, and a redelivered event
# (its file already there) is answered ok without being written twice.
# Usage: worker.sh DIR
#
# leafline writes one event per line on stdin and reads one result per line
# on stdout. An event_id that is not a plain file name is refused for good.
# The file and the directory are fsynced (coreutils sync FILE) before the
# answer, so an event answered ok survives a power cut.
dir=${1:?usage: worker.sh DIR}
mkdir -p "$dir" || exit 1
while IFS= read -r line; do
	# event_id comes first in every event; keep it as JSON text.
	id=$(printf '%s\n' "$line" |
		sed -n 's/^{"event_id":"\(\([^"\\]*\\.\)*[^"\\]*\)".*/\1/p')
	case $id in
	'' | .* | *[!A-Za-z0-9._-]*)
		printf '{"event_id":"%s","result":"fail","error":"event_id is not a plain file name"}\n' "$id"
		continue ;;
	esac
	if [ ! -e "$dir/$id.json" ]; then
		if ! { printf '%s\n' "$line" >"$dir/.tmp-$id" && sync "$dir/.tmp-$id" &&
			mv -f "$dir/.tmp-$id" "$dir/$id.json" && sync "$dir"; }; then
			printf '{"event_id":"%s","result":"retry","error":"cannot write the file"}\n' "$id"
			continue
		fi
	fi
	printf '{"event_id":"%s","result":"ok"}\n' "$id"
done
