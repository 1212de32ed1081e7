"""Where bytes live: named shared arrays (``shm``); memory tiers come later."""
