"""Module-level values computed at import: some from entropy, some read by agents."""

import os
import random
import time
import uuid

RUN_TAG = f"run-{uuid.uuid4().hex}"  # expect: TL-UUID-001
BOOTED = time.time()  # expect: TL-CLOCK-001
UNUSED_STAMP = time.time()
LABEL = "gaps"
HOME = os.path.join("/srv", "agents")
_gen = random.Random()
