import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// An incremental digest of one algorithm, safe to feed from the I/O pool.
// The hash functions are plain value types; every access goes through the lock.
final class ContentDigest: @unchecked Sendable {
    private enum Function {
        case sha256(SHA256)
        case sha1(Insecure.SHA1)
        case md5(Insecure.MD5)
    }

    private struct State {
        var function: Function
        var bytes: Int64 = 0
    }

    private let state: NIOLockedValueBox<State>

    init(_ algorithm: Checksum.Algorithm) {
        let function: Function =
            switch algorithm {
            case .sha256: .sha256(SHA256())
            case .sha1: .sha1(Insecure.SHA1())
            case .md5: .md5(Insecure.MD5())
            }
        state = NIOLockedValueBox(State(function: function))
    }

    /// How many bytes have been fed.
    var byteCount: Int64 { state.withLockedValue { $0.bytes } }

    func update(_ bytes: UnsafeRawBufferPointer) {
        state.withLockedValue { state in
            state.bytes += Int64(bytes.count)
            switch state.function {
            case .sha256(var hash):
                hash.update(bufferPointer: bytes)
                state.function = .sha256(hash)
            case .sha1(var hash):
                hash.update(bufferPointer: bytes)
                state.function = .sha1(hash)
            case .md5(var hash):
                hash.update(bufferPointer: bytes)
                state.function = .md5(hash)
            }
        }
    }

    func update(_ buffer: ByteBuffer) {
        buffer.withUnsafeReadableBytes { update($0) }
    }

    /// The digest so far as lowercase hexadecimal.
    func hex() -> String {
        state.withLockedValue { state in
            switch state.function {
            case .sha256(let hash): Hex.lowercase(hash.finalize())
            case .sha1(let hash): Hex.lowercase(hash.finalize())
            case .md5(let hash): Hex.lowercase(hash.finalize())
            }
        }
    }
}
