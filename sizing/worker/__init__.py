"""The sizing worker: the crash-isolated process that loads the vendor libraries, and its virtual
device."""
