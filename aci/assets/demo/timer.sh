#!/bin/bash
# Time left until the deadline in .deadline (seconds since the epoch), as PostTrainBench's timer prints it.
DEADLINE=$(cat "$(dirname "$0")/.deadline")
LEFT=$(( DEADLINE - $(date +%s) ))
if [ "$LEFT" -le 0 ]; then
    echo "Timer expired!"
else
    echo "Remaining time (hours:minutes):"
    printf '%d:%02d\n' $(( LEFT / 3600 )) $(( (LEFT % 3600) / 60 ))
fi
