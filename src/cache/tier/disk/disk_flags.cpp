// cache::add_disk_flags: the disk tier's flags (docs/prompt-cache.md "Configuration"); see
// disk_tier.h. The write-behind triggers (--cache-disk-idle-s, --cache-disk-max-unwritten-s) are
// the disk tier's flags and apply to every tier below RAM (tier_link writes each entry to all).
#include "cache/tier/disk/disk_tier.h"

namespace lineage::cache {

void add_disk_flags(flag_sink & add, config & cc) {
    add.boolean({"--cache-disk", "LINEAGE_CACHE_DISK", "[=BOOL]", "true",
                 "keep a disk tier of the prompt cache in --cache-dir, so the first requests after a restart "
                 "restore from disk instead of a cold prefill"},
                cc.disk);
    add.text({"--cache-dir", "LINEAGE_CACHE_DIR", "PATH",
              "$XDG_CACHE_HOME/lineage/prompt-cache, else ~/.cache/lineage/prompt-cache",
              "directory of the disk tier: one blob file per entry and a SQLite index; one server per directory"},
             cc.disk_dir, false);
    add.bytes({"--cache-disk-capacity-bytes", "LINEAGE_CACHE_DISK_CAPACITY_BYTES", "BYTES", "",
               "byte cap of the disk tier's files; least recently used files are deleted first, anchors last"},
              cc.disk_capacity_bytes, 0);
    add.seconds({"--cache-disk-idle-s", "LINEAGE_CACHE_DISK_IDLE_S", "SECONDS", "",
                 "write an entry to disk once it has been unused this long; 0 = as soon as it is stored (entries "
                 "are also written when they leave RAM and at shutdown)"},
                cc.disk_idle_s, true);
    add.seconds({"--cache-disk-max-unwritten-s", "LINEAGE_CACHE_DISK_MAX_UNWRITTEN_S", "SECONDS", "",
                 "write an entry to disk once it has gone this long without a copy there, even while the engine "
                 "is busy (at most one state read per engine step), so a crash under continuous load loses at "
                 "most this much; 0 = off"},
                cc.disk_max_unwritten_s, true);
}

}  // namespace lineage::cache
