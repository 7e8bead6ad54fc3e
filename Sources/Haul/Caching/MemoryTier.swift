import Foundation
import NIOConcurrencyHelpers

/// The response cache's memory tier: entries kept up to a cost in bytes, the least
/// recently used forgotten first.
///
/// An entry's cost is its body's size plus an estimate of its headers (see
/// ``cost(of:)``). Lookups, stores and evictions take constant time: a dictionary from
/// key to slot, and the slots linked from most to least recently used by index, in
/// arrays (no object per entry, no allocation on a hit). Safe to use from any thread.
final class MemoryTier: Sendable {
    /// The most the entries may cost together, and the most one may cost.
    let costLimit: Int
    let entryCostLimit: Int
    private let state: NIOLockedValueBox<State>

    /// An empty tier that keeps up to `costLimit` bytes, of entries costing at most
    /// `entryCostLimit` each.
    init(costLimit: Int, entryCostLimit: Int) {
        self.costLimit = max(0, costLimit)
        self.entryCostLimit = max(0, entryCostLimit)
        state = NIOLockedValueBox(State())
    }

    /// What an entry costs the tier: its body's bytes, its header fields' names and
    /// values in UTF-8 (the response's and the varying request fields), and 200 bytes for
    /// the rest.
    static func cost(of entry: CachedEntry) -> Int {
        var cost = entry.body.count + 200
        for field in entry.response.headers {
            cost += field.name.utf8.count + field.value.utf8.count
        }
        for field in entry.response.varying {
            cost += field.name.utf8.count + field.value.utf8.count
        }
        return cost
    }

    /// The entry stored under `key`, which becomes the most recently used; `nil` if none.
    func entry(for key: String) -> CachedEntry? {
        state.withLockedValue { state in
            guard let slot = state.index[key] else { return nil }
            state.moveToFront(slot)
            return state.slots[slot].entry
        }
    }

    /// Stores `entry` under `key` as the most recently used, then forgets the least
    /// recently used entries until the tier is within its cost limit. An entry costing
    /// more than ``entryCostLimit`` is not kept, and the entry `key` had is forgotten.
    func store(_ entry: CachedEntry, for key: String) {
        let cost = Self.cost(of: entry)
        let limit = costLimit
        // What is replaced or evicted is released after the lock, not under it.
        let released: CachedEntry? = state.withLockedValue { state in
            guard cost <= entryCostLimit else { return state.remove(key) }
            let replaced = state.insert(entry, cost: cost, for: key)
            while state.totalCost > limit, state.tail >= 0 {
                state.remove(slot: state.tail)
            }
            return replaced
        }
        _ = released
    }

    /// Forgets the entry stored under `key`, if any.
    func remove(_ key: String) {
        let released = state.withLockedValue { $0.remove(key) }
        _ = released
    }

    /// Forgets every entry.
    func removeAll() {
        let released = state.withLockedValue { state in
            let old = state
            state = State()
            return old
        }
        _ = released
    }

    /// What the entries cost together, in bytes.
    var totalCost: Int { state.withLockedValue { $0.totalCost } }

    /// How many entries the tier holds.
    var count: Int { state.withLockedValue { $0.index.count } }

    /// The keys from the most to the least recently used (for tests).
    var keysByRecency: [String] {
        state.withLockedValue { state in
            var keys: [String] = []
            var slot = state.head
            while slot >= 0 {
                keys.append(state.slots[slot].key)
                slot = state.slots[slot].next
            }
            return keys
        }
    }

    /// One place in the recency list: an entry and its neighbours' indices (-1 for none).
    private struct Slot {
        var key: String
        var entry: CachedEntry?
        var cost: Int
        var previous: Int
        var next: Int
    }

    /// The entries, their order of use and their cost.
    private struct State {
        var index: [String: Int] = [:]
        var slots: [Slot] = []
        /// Slots no entry uses, to be used again before `slots` grows.
        var free: [Int] = []
        /// The most and the least recently used slots (-1 when empty).
        var head = -1
        var tail = -1
        var totalCost = 0

        /// Stores `entry` at the front; returns the entry it replaced.
        mutating func insert(_ entry: CachedEntry, cost: Int, for key: String) -> CachedEntry? {
            if let slot = index[key] {
                let replaced = slots[slot].entry
                totalCost += cost - slots[slot].cost
                slots[slot].entry = entry
                slots[slot].cost = cost
                moveToFront(slot)
                return replaced
            }
            let fresh = Slot(key: key, entry: entry, cost: cost, previous: -1, next: head)
            let slot: Int
            if let reused = free.popLast() {
                slot = reused
                slots[slot] = fresh
            } else {
                slot = slots.count
                slots.append(fresh)
            }
            if head >= 0 { slots[head].previous = slot }
            head = slot
            if tail < 0 { tail = slot }
            index[key] = slot
            totalCost += cost
            return nil
        }

        /// Forgets `key`'s entry; returns it.
        mutating func remove(_ key: String) -> CachedEntry? {
            guard let slot = index[key] else { return nil }
            return remove(slot: slot)
        }

        /// Forgets the entry in `slot`; returns it.
        @discardableResult
        mutating func remove(slot: Int) -> CachedEntry? {
            unlink(slot)
            let removed = slots[slot].entry
            index[slots[slot].key] = nil
            totalCost -= slots[slot].cost
            slots[slot] = Slot(key: "", entry: nil, cost: 0, previous: -1, next: -1)
            free.append(slot)
            return removed
        }

        /// Makes `slot` the most recently used.
        mutating func moveToFront(_ slot: Int) {
            guard head != slot else { return }
            unlink(slot)
            slots[slot].next = head
            if head >= 0 { slots[head].previous = slot }
            head = slot
            if tail < 0 { tail = slot }
        }

        /// Takes `slot` out of the recency list.
        private mutating func unlink(_ slot: Int) {
            let previous = slots[slot].previous
            let next = slots[slot].next
            if previous >= 0 { slots[previous].next = next } else { head = next }
            if next >= 0 { slots[next].previous = previous } else { tail = previous }
            slots[slot].previous = -1
            slots[slot].next = -1
        }
    }
}
